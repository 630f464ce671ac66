"""Sans-I/O protocol codecs: bytes in, commands out; replies to bytes."""
