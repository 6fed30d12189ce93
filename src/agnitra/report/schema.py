"""The result dataclasses moved to `agnitra.results` (below every stage that produces them);
this name stays for code written against it."""

from agnitra.results import *  # noqa: F401,F403
from agnitra.results import to_dict  # noqa: F401
