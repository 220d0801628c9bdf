"""kjit's exceptions: every failure carries the gRPC-style status code and the message kjit gave."""

CODE_NAMES = {
    1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED", 5: "NOT_FOUND",
    6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED", 9: "FAILED_PRECONDITION",
    10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED", 13: "INTERNAL", 14: "UNAVAILABLE",
    15: "DATA_LOSS", 16: "UNAUTHENTICATED",
}
UNIMPLEMENTED = 12


class Error(RuntimeError):
    """A kjit call failed. ``code`` is the gRPC-style status code, ``message`` what to fix."""

    def __init__(self, code, message):
        self.code = int(code)
        self.message = message
        super().__init__(f"{self.code_name}: {message}")

    @property
    def code_name(self):
        return CODE_NAMES.get(self.code, str(self.code))


class Unsupported(Error):
    """kjit does not implement this call (a feature, a shape, a dtype): run the original kernel.

    Raised before anything is launched, so the caller can fall back with the same arguments."""

    def __init__(self, message):
        super().__init__(UNIMPLEMENTED, message)
