from enum import IntEnum, auto


class AttentionArch(IntEnum):
    MLA = auto()
    MHA = auto()
