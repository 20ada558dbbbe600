"""Data the checks ship: the C++ consumer project and the quantized model fixture."""
