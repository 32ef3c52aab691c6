"""Everything that talks to libcupti (cupti-python and ctypes over the same library) and the CUDA
driver. Imported only when a session starts: `import proton` works without CUDA."""
