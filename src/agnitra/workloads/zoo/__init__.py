"""Built-in workloads; importing this package registers them all."""

from agnitra.workloads.zoo import llama  # noqa: F401
