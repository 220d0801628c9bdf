"""A stand-in for the part of torch that kjit.verify_attention reads (tests/python/test_kjit_torch_ops.py):
dtypes (singletons, compared by identity as torch's are), and tensors that are only metadata (a
shape, strides in elements, a device and a fake address), never data. No CUDA: the current stream
is a fixed number per device."""
import itertools


class dtype:
    def __init__(self, name, itemsize):
        self.name = name
        self.itemsize = itemsize

    def __repr__(self):
        return f"torch.{self.name}"


bool = dtype("bool", 1)  # noqa: A001 - torch's name
uint8 = dtype("uint8", 1)
int32 = dtype("int32", 4)
int64 = dtype("int64", 8)
uint32 = dtype("uint32", 4)
float16 = dtype("float16", 2)
bfloat16 = dtype("bfloat16", 2)
float32 = dtype("float32", 4)
float8_e4m3fn = dtype("float8_e4m3fn", 1)
float8_e5m2 = dtype("float8_e5m2", 1)

_addresses = itertools.count(1 << 32, 1 << 24)  # 16 MiB apart: no two stand-in tensors overlap


def _dense_strides(shape):
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


class Tensor:
    def __init__(self, shape, dtype, device=0, address=None, strides=None):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = device  # a CUDA ordinal, or -1 for the CPU
        self._address = next(_addresses) if address is None else address
        self._strides = _dense_strides(self.shape) if strides is None else tuple(strides)

    def data_ptr(self):
        return self._address

    def stride(self):
        return self._strides

    def get_device(self):
        return self.device

    def dim(self):
        return len(self.shape)

    def element_size(self):
        return self.dtype.itemsize

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def narrow_last(self, size):
        """self[..., :size]: the same address and strides."""
        return Tensor(self.shape[:-1] + (size,), self.dtype, self.device, self._address, self._strides)

    def view(self, dtype):
        """The same bytes as another dtype of the same size (what torch allows without a copy)."""
        if dtype.itemsize != self.dtype.itemsize:
            raise RuntimeError(f"stand-in view from {self.dtype} to {dtype} changes the element size")
        return Tensor(self.shape, dtype, self.device, self._address, self._strides)


def empty(*size, dtype=float32, device="cuda:0"):
    shape = size[0] if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
    ordinal = int(str(device).rpartition(":")[2] or 0)
    return Tensor(shape, dtype, ordinal)


class _C:
    @staticmethod
    def _cuda_getCurrentRawStream(device):
        return 0x5000 + device
