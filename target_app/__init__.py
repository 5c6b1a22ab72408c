"""The bundled streaming target: a transformers model served as SSE by Starlette on uvicorn."""
