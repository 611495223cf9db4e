"""Hypothesis set-up shared by the fuzz tests: one fixed, reproducible profile and byte-level mutators.

The profile is derandomized (the same examples on every run and machine) with no per-example deadline
(the machine may be loaded); each property sets its own ``max_examples``, stated next to it.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

settings.register_profile(
    "vsekit-ci",
    derandomize=True,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.load_profile("vsekit-ci")

#: Byte strings that break text readers in the ways real files do.
NASTY_BYTES = [
    b"\x00",  # NUL
    b"\xff\xfe",  # a UTF-16 BOM / invalid UTF-8
    b"\xef\xbb\xbf",  # a UTF-8 BOM in the middle of a file
    b"\xc3",  # a truncated UTF-8 sequence
    b"\r",
    b"\r\n",
    b"\x1c",  # str.splitlines() splits here, editors do not
    b"\x0c",
    "\u2028".encode(),
    "\u0085".encode(),
    b"\t",
    b",",
    b'"',
    b"#",
    b"x" * 200_000,  # a huge line (over the csv module's field limit)
]


@st.composite
def mutated(draw: st.DrawFn, base: bytes) -> bytes:
    """``base`` with a few edits: nasty bytes inserted, a slice deleted or truncated, a BOM, CRLF ends."""
    data = bytearray(base)
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["insert", "delete", "truncate", "crlf", "bom", "byte"]))
        at = draw(st.integers(0, len(data)))
        if op == "insert":
            data[at:at] = draw(st.sampled_from(NASTY_BYTES) | st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 20))]
        elif op == "truncate":
            del data[at:]
        elif op == "crlf":
            data = bytearray(bytes(data).replace(b"\n", b"\r\n"))
        elif op == "bom":
            data[0:0] = b"\xef\xbb\xbf"
        elif op == "byte" and data:
            data[min(at, len(data) - 1)] = draw(st.integers(0, 255))
    return bytes(data)
