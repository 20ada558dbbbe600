"""splitter: split the ExecuTorch wheel into runtime, quantized-kernel and export packages."""

__version__ = "0.1.0"
