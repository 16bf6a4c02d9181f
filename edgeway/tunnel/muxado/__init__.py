"""muxado, the stream multiplexer the ngrok agent SDKs speak: a sans-I/O frame codec
(``frames``) and session state machine (``session``); the asyncio shell lives elsewhere."""
