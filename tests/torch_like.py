"""PyTorch's nn.Module call machinery as a library file's source, for tests and bench/hot_paths.py
to exec under a site-packages path: the python context's paths meet its frames at every module
call, as in a real model (no torch needed)."""

TORCH_LIKE = """
class Module:
    def __call__(self, *args):
        return self._wrapped_call_impl(*args)
    def _wrapped_call_impl(self, *args):
        return self._call_impl(*args)
    def _call_impl(self, *args):
        return self.forward(*args)
def linear(launch):
    return launch()
"""
