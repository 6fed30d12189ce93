"""The service: `agnitra serve` (FastAPI over the same `api` and store as the CLI), its job queue in
the store's database and the workers that run the jobs (`agnitra worker`, or `serve --workers N`)."""
