"""A token stream as the client read it.

- :mod:`.request`: :class:`StreamRequest`, what a stream sends, and the limits of its reads;
- :mod:`.client`: the streaming HTTP client that reads a stream and stamps every read;
- :mod:`.trace`: :class:`StreamTrace`, what one stream looked like on the wire.
"""
