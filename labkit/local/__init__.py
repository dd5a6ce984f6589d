"""The local server: build or find ``llama-server``, fetch the model, run and stop the process.

    install   cache_dir, ensure_setup, find_or_build_server, ensure_model -> LocalSetup
              (private: _build compiles llama-server, _model fetches/verifies the GGUF,
              _common holds the result types and subprocess/lock/cache helpers)
    server    ManagedServer: a child for one run, never an orphan
    detached  start_detached/server_status/stop_detached: `labkit server start|status|stop`
    (``labkit setup`` and ``labkit server start|status|stop`` are in labkit.cli.local)

It knows nothing of experiments or providers: it hands back a base URL.
"""

from labkit.local.detached import ServerState, server_status, start_detached, stop_detached
from labkit.local.install import (
    LLAMA_CPP_PYTHON_VERSION,
    MODEL_SHA256,
    LocalSetup,
    ModelFile,
    ProgressCallback,
    ServerBinary,
    cache_dir,
    ensure_model,
    ensure_setup,
    find_or_build_server,
)
from labkit.local.server import ManagedServer

__all__ = [
    "LLAMA_CPP_PYTHON_VERSION",
    "MODEL_SHA256",
    "LocalSetup",
    "ManagedServer",
    "ModelFile",
    "ProgressCallback",
    "ServerBinary",
    "ServerState",
    "cache_dir",
    "ensure_model",
    "ensure_setup",
    "find_or_build_server",
    "server_status",
    "start_detached",
    "stop_detached",
]
