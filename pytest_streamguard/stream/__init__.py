"""A token stream as the client read it.

- :mod:`.request`: :class:`StreamRequest`, what a stream sends, and the limits of its reads;
- :mod:`.client`: the streaming HTTP client that reads a stream and stamps every read;
- :mod:`.recognize`: what the body is (its framing and format, or what it looks like instead);
- :mod:`.endings`: the messages of a stream that ended empty, truncated or timed out;
- :mod:`.transport`: the lean HTTP transport that stamps each read at its arrival;
- :mod:`.trace`: :class:`StreamTrace`, what one stream looked like on the wire.
"""
