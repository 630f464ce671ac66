"""The backup file: a versioned header line, then a checksummed body. Sans I/O.

    HAQUEUE-BACKUP <version> <JSON object>\\n
    <body: `length` bytes>

The header is one line a person can read (`head -1 FILE`); its JSON carries
`length` and `sha256` of the body, and facts about where the backup came from
(`taken_at_ms`, `index`, `term`, `cluster`, `node`, `haqueue`). The body is
the state records (backup/records.py) pickled (protocol 5) and read back by an
unpickler that refuses every global: plain tuples, ints, strings and bytes
only, so a file from elsewhere cannot name code to run. docs/backup.md
describes every field.

Reading is strict, and every refusal is a BackupFileError whose str() is one
line: not a backup, a newer format, a header that does not parse, a body
shorter or longer than the header says (truncated), a checksum that does not
match (corrupt), records of the wrong shape.

Format checklist (as beanstalkd's WAL version comment): a change to the header
or the body's records gets a new FORMAT_VERSION; `decode` keeps reading every
older version it can (records of an older version converted on the way in);
tests/backup/test_fileformat.py keeps a file of each version
(tests/testdata/backup-v1.haqbackup) and insists it still restores.
"""

from __future__ import annotations

import hashlib
import io
import json
import pickle

from haqueue.backup.records import check_shape

MAGIC = b"HAQUEUE-BACKUP"
FORMAT_VERSION = 1
HEADER_MAX = 4096  # bytes of the header line, newline included: the JSON is a few hundred


class BackupFileError(Exception):
    """A file this haqueue cannot restore from; str() is one line naming why."""


def encode(records: tuple, facts: dict) -> bytes:
    """The whole file: header line and body."""
    body = pickle.dumps(records, protocol=5)
    return header(body, facts) + body


def header(body: bytes, facts: dict) -> bytes:
    fields = {**facts, "length": len(body), "sha256": hashlib.sha256(body).hexdigest()}
    line = MAGIC + b" %d " % FORMAT_VERSION + json.dumps(fields, sort_keys=True).encode() + b"\n"
    if len(line) > HEADER_MAX:
        raise ValueError(f"backup header of {len(line)} bytes, at most {HEADER_MAX}")
    return line


def read_header(data: bytes) -> tuple[dict, int]:
    """(the header's fields, where the body starts), or BackupFileError."""
    end = data.find(b"\n", 0, HEADER_MAX)
    first = data[:end if end >= 0 else HEADER_MAX]
    if not first.startswith(MAGIC + b" "):
        raise BackupFileError("not a haqueue backup (no HAQUEUE-BACKUP header)")
    if end < 0:
        raise BackupFileError("the header line is cut off or too long (truncated?)")
    version_text, _, json_text = first[len(MAGIC) + 1:].partition(b" ")
    if not version_text.isdigit():
        raise BackupFileError(f"the format version {version_text[:20].decode(errors='replace')!r} is not a number")
    version = int(version_text)
    if version > FORMAT_VERSION:
        raise BackupFileError(f"format {version} is newer than this haqueue reads ({FORMAT_VERSION}): "
                              f"restore with the haqueue version that wrote it, or a newer one")
    if version < 1:
        raise BackupFileError(f"format {version} does not exist")
    try:
        fields = json.loads(json_text)
    except ValueError:
        raise BackupFileError("the header's JSON does not parse (corrupt?)") from None
    if (not isinstance(fields, dict) or type(fields.get("length")) is not int or fields["length"] < 0
            or not isinstance(fields.get("sha256"), str)):
        raise BackupFileError("the header lacks the body's length and sha256 (corrupt?)")
    fields["format"] = version
    return fields, end + 1


def decode(data: bytes) -> tuple[tuple, dict]:
    """(state records, header fields) of a whole backup file, or BackupFileError."""
    fields, start = read_header(data)
    body = data[start:]
    if len(body) < fields["length"]:
        raise BackupFileError(f"the body has {len(body)} of its {fields['length']} bytes (truncated)")
    if len(body) > fields["length"]:
        raise BackupFileError(f"{len(body) - fields['length']} bytes follow the body (not one backup file)")
    if hashlib.sha256(body).hexdigest() != fields["sha256"]:
        raise BackupFileError("the body's checksum does not match its header (corrupt)")
    try:
        records = _PlainUnpickler(io.BytesIO(body)).load()
    except Exception as exc:
        raise BackupFileError(f"the body does not load ({type(exc).__name__}: {exc})"[:300]) from None
    problem = check_shape(records)
    if problem is not None:
        raise BackupFileError(f"the body is not a haqueue state: {problem}")
    return records, fields


class _PlainUnpickler(pickle.Unpickler):
    """Tuples, lists, dicts, ints, strings, bytes, None and booleans: no globals at all."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing {module}.{name}: a backup holds plain values only")
