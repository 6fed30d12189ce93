"""Imported only by a local worker's fork server (`executor.LocalExecutor`), never elsewhere.

The fork server is a child of the worker that forks each job's process from an interpreter that
has already imported Agnitra and the search (a job starts in a fraction of a second instead of a
fresh interpreter's imports). It dies with the worker (PDEATHSIG, set here as it starts), and each
job's process dies with it (`worker._run_job`): a worker killed outright takes its jobs with it, as
when they were its own children."""

from agnitra.bench.isolated import die_with_parent

die_with_parent()

import agnitra.search.optimize  # noqa: E402,F401 - what every job runs
import agnitra.service.worker  # noqa: E402,F401
