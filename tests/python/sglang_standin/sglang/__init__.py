"""A stand-in for SGLang in kjit.sglang's CPU tests.

It has only the module paths, class names, attributes and call signatures that kjit.sglang
touches or that its tests drive, and numpy arrays where SGLang has torch tensors. The kernels are
recorders: they note their arguments and write a known value into their output.
"""
