"""Built-in workloads; importing this package registers them all."""

from agnitra.workloads.zoo import bert, llama, mamba, minilm, resnet, tinylm_py, whisper  # noqa: F401
