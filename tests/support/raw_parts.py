"""8-byte little-endian integers: the raw-part encoding the test actors use
(the Python RawActor, the C plugin's CCounter)."""


def i64(v: int) -> bytes:
    return v.to_bytes(8, "little", signed=True)


def from_i64(b: bytes) -> int:
    return int.from_bytes(b, "little", signed=True)
