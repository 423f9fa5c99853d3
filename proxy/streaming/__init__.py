"""The streaming engine (gevent): upstream bytes in, one SSE frame per write out.

Owns the life of one streamed response (docs/architecture.md §6), in pieces, each one concern:
- `engine`: `StreamingBody`, the WSGI body that relays one upstream stream in the one greenlet
  that writes to the client — priming its first frame, the loop of read, translate, write, the
  end-of-stream callback (`on_end`, before the last frames go out, where it may wait), the
  outcome reported once, `end_all_streams()` for a shutdown;
- `waiting`: how a stream waits — at once for the upstream socket, its deadline and the client's
  socket, on watchers, not greenlets;
- `direct`: the mode that writes below the WSGI server (`ClientWriter`), and the hub's relay step
  that sends a chunk without waking the greenlet;
- `hangup`: a client that hangs up before its stream begins (`hangup_aborts`, `ClientGone`);
- `fields`: what one stream holds, and the values it hands back (`StreamOutcome`,
  `EarlyStreamFailure`).
"""

from __future__ import annotations

from proxy.streaming.engine import FINISH_MAX_BYTES, FINISH_WITHIN, StreamingBody, end_all_streams
from proxy.streaming.fields import ClientWriter, EarlyStreamFailure, StreamOutcome, StreamTap
from proxy.streaming.hangup import ClientGone, hangup_aborts, peer_left

__all__ = ["FINISH_MAX_BYTES", "FINISH_WITHIN", "ClientGone", "ClientWriter", "EarlyStreamFailure", "StreamOutcome",
           "StreamTap", "StreamingBody", "end_all_streams", "hangup_aborts", "peer_left"]
