"""Read and edit the dynamic-linking facts of shipped binaries."""
