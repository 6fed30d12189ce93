"""ONNX Runtime: export a workload for it, and run a session as a torch-facing module."""
