# The C extension built from _record_starts.c (setup.py), where a compiler was found:
# the positions of the `count` records' length varints in buffer[start:stop], as native
# int64s; ValueError when the records do not fill that span exactly.

from typing_extensions import Buffer

def record_starts(buffer: Buffer, start: int, stop: int, count: int, /) -> bytes: ...
