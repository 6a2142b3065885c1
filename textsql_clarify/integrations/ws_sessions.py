"""WebSocket session lifetimes for the OpenEnv server: a client that leaves mid-step stops its step's
SQL at once, and a disconnect logs no traceback.

OpenEnv 0.3's ``/ws`` endpoint (``openenv/core/env_server/http_server.py``, ``websocket_endpoint``) awaits a
step before it reads the socket again, so it learns that the client left only when the step returns and
its reply cannot be sent; until then the session holds its slot of ``max_concurrent_envs``. The failed
sends (starlette ``WebSocketDisconnect`` / ``WebSocketDisconnected``, uvicorn ``ClientDisconnected``) then
escape the endpoint's ``finally`` (its last ``websocket.close()`` after the client has gone, even after a
clean ``close`` message), and uvicorn logs each as "Exception in ASGI application" with a traceback of
about 4 KB.

:class:`DisconnectWatch` (an ASGI middleware, WebSocket scopes only) fixes both from outside OpenEnv:

* it reads the client's messages as they arrive and hands them to the endpoint through a queue, so a
  ``websocket.disconnect`` is seen while a step runs; the :class:`Connection` of the socket (a context
  variable, :data:`CURRENT`, which the endpoint's task inherits) then calls the running step's interrupt
  every :data:`INTERRUPT_EVERY_S` seconds until the step returns (:func:`run_step`), so the step ends and
  the session closes within a moment instead of at the step's time limit;
* once the client has gone, sends are dropped (nothing can reach it), a ``websocket.close`` that finds
  the socket closed is dropped too, and a disconnect exception that still escapes the endpoint is logged
  as one line (``DEBUG``, logger ``textsql_clarify.integrations.ws_sessions``) instead of a traceback.
  Any other exception, or one raised while the client is still there, propagates as before.

Source: the ASGI WebSocket specification (``websocket.receive`` / ``websocket.disconnect`` events,
asgi.readthedocs.io), OpenEnv 0.3 ``HTTPEnvServer`` (``_create_session``, ``_destroy_session``,
``Environment.step_async``), uvicorn's ``protocols/utils.py`` (``ClientDisconnected``, an ``OSError``).
"""
from __future__ import annotations

import asyncio
import contextvars
import logging
from typing import Any, Awaitable, Callable

logger = logging.getLogger(__name__)

#: How often (seconds) a step whose client left is interrupted again until it returns: an interrupt stops
#: only the statement running at that moment, and a step may start another one (gold, then the agent's).
INTERRUPT_EVERY_S = 0.05


def _disconnect_types() -> tuple[type[BaseException], ...]:
    """The exception types that mean "the client has gone": starlette's, uvicorn's, websockets'."""
    types: list[type[BaseException]] = []
    try:
        from starlette.websockets import WebSocketDisconnect, WebSocketDisconnected
        types += [WebSocketDisconnect, WebSocketDisconnected]
    except ImportError:  # pragma: no cover - starlette comes with fastapi
        pass
    try:
        from uvicorn.protocols.utils import ClientDisconnected
        types.append(ClientDisconnected)
    except ImportError:  # pragma: no cover - another ASGI server
        pass
    try:
        from websockets.exceptions import ConnectionClosed
        types.append(ConnectionClosed)
    except ImportError:  # pragma: no cover
        pass
    return tuple(types)


DISCONNECT_TYPES = _disconnect_types()


class Connection:
    """One client's WebSocket, as :class:`DisconnectWatch` sees it.

    Attributes:
        gone: ``True`` once the client disconnected (or a send found the socket closed).
        interrupted_steps: steps that were interrupted because the client left (0 or 1 per connection in
            practice), for logs and tests.
    """

    def __init__(self) -> None:
        self.gone = False
        self.interrupted_steps = 0
        self._step: tuple[asyncio.Future, Callable[[], Any]] | None = None
        self._tasks: set[asyncio.Task] = set()

    def left(self) -> None:
        """Mark the client gone; a step running now is interrupted until it returns."""
        self.gone = True
        if self._step is not None:
            self._interrupt(*self._step)

    def _interrupt(self, future: asyncio.Future, interrupt: Callable[[], Any]) -> None:
        if future.done():
            return
        self.interrupted_steps += 1
        task = asyncio.ensure_future(_interrupt_until_done(future, interrupt))
        self._tasks.add(task)  # held, so the task is not collected before it ends
        task.add_done_callback(self._tasks.discard)


async def _interrupt_until_done(future: asyncio.Future, interrupt: Callable[[], Any]) -> None:
    """Call ``interrupt()`` now and every :data:`INTERRUPT_EVERY_S` seconds until ``future`` is done."""
    while not future.done():
        try:
            interrupt()
        except Exception:  # noqa: BLE001 - best effort: the step still ends at its own time limit
            logger.debug("interrupting a step whose client left failed", exc_info=True)
            return
        await asyncio.wait([future], timeout=INTERRUPT_EVERY_S)


#: The :class:`Connection` of the WebSocket whose endpoint runs in this task (``None`` outside one).
CURRENT: contextvars.ContextVar[Connection | None] = contextvars.ContextVar("textsql_clarify_ws_connection",
                                                                            default=None)


async def run_step(call: Callable[[], Any], executor: Any, interrupt: Callable[[], Any]) -> Any:
    """Run ``call()`` in ``executor`` and return its result; if this task's WebSocket client leaves meanwhile
    (:data:`CURRENT`), call ``interrupt()`` until ``call`` returns. Outside a watched WebSocket it only runs
    ``call`` in ``executor``.

    Args:
        call: the blocking step (no arguments). executor: a ``concurrent.futures.Executor`` (one thread per
            session keeps a session's steps in order). interrupt: stops what ``call`` runs, callable from the
            event loop's thread without blocking (``TextSQLClarifyEnv.interrupt_sql``).
    Raises:
        whatever ``call`` raises.
    """
    future = asyncio.get_running_loop().run_in_executor(executor, call)
    conn = CURRENT.get()
    if conn is None:
        return await future
    conn._step = (future, interrupt)
    if conn.gone:  # the client left before the step began
        conn._interrupt(future, interrupt)
    try:
        return await future
    finally:
        conn._step = None


class DisconnectWatch:
    """ASGI middleware: see the module docstring. ``app.add_middleware(DisconnectWatch)``.

    Args:
        app: the ASGI app it wraps.
    """

    def __init__(self, app: Callable[..., Awaitable[None]]):
        self.app = app

    async def __call__(self, scope: dict, receive: Callable[[], Awaitable[dict]],
                       send: Callable[[dict], Awaitable[None]]) -> None:
        if scope.get("type") != "websocket":
            await self.app(scope, receive, send)
            return
        conn = Connection()
        inbox: asyncio.Queue = asyncio.Queue()  # unbounded, as the ASGI server's own queue is

        async def pump() -> None:
            try:
                while True:
                    message = await receive()
                    if message.get("type") == "websocket.disconnect":
                        conn.left()
                        inbox.put_nowait(message)
                        return
                    inbox.put_nowait(message)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the server's receive failed: the client is as good as gone
                conn.left()
                inbox.put_nowait({"type": "websocket.disconnect", "code": 1006})

        async def guarded_send(message: dict) -> None:
            if conn.gone and message.get("type") in ("websocket.send", "websocket.close"):
                return  # the client has gone: nothing can reach it, and the server would raise
            try:
                await send(message)
            except OSError:  # uvicorn's ClientDisconnected: the socket closed under this send
                conn.gone = True
                if message.get("type") != "websocket.close":
                    raise

        token = CURRENT.set(conn)
        reader = asyncio.ensure_future(pump())
        escaped = None
        try:
            await self.app(scope, inbox.get, guarded_send)
        except DISCONNECT_TYPES as e:
            if not conn.gone:
                raise
            escaped = type(e).__name__
        finally:
            CURRENT.reset(token)
            reader.cancel()
        if escaped or conn.interrupted_steps:  # one line per connection at most
            logger.debug("WebSocket client disconnected%s%s", " during a step (its SQL was interrupted)"
                         if conn.interrupted_steps else "", f" ({escaped})" if escaped else "")
