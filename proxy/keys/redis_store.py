"""Runtime keys in Redis (`state: {backend: redis}`), shared by every host: the `KeyStore`
(proxy/keys/store.py) that gives the same answers as the in-memory and state-file stores.

Owns the Redis layout, all under `state.prefix` (proxy.state.redis_connection.key):
`keys:version` (the counter, INCR'd by every commit), hashes name → JSON document
(proxy/keys/records.py) `keys:keys`, `keys:groups`, `keys:admins`, `keys:overlays`, and name → time
`keys:last_used`; `keys:audit`, a sorted set scored by the entry's time whose members are the
commit's version (zero-padded, so entries of the same instant order as written) and the entry's
JSON; `keys:idempotent:<digest of actor and key>`, one string per record that Redis forgets at its
`expires` (PEXPIREAT), indexed by that time in `keys:idempotent` for `purge`. `commit` is one Lua
script — new names checked (runtime ones and the config file's `taken`), hashes written, version
raised, audit entry added, record kept, and the new version PUBLISHed on `keys:changed` so workers
rebuild at once rather than at their next poll — atomic across hosts, and a NameTaken writes
nothing. `snapshot` reads everything in one MULTI/EXEC. A failing Redis raises redis' own errors;
the caller decides. `blocking` is False: redis-py's sockets are cooperative under gevent.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from proxy.config.state import StateConfig
from proxy.keys import records
from proxy.keys.model import AuditEntry, Change, Idempotent, NameTaken, Overlay, Snapshot
from proxy.state.redis_connection import connect, key

if TYPE_CHECKING:
    import redis

# KEYS: version, keys, groups, admins, overlays, audit, channel, idempotency record ('' for none),
# the records' index. ARGV[1]: the change as JSON {taken, new, delete: {keys, groups, admins},
# put: {keys, groups, admins, overlays} (name → document text)}; ARGV[2]: the audit entry's time;
# ARGV[3]: its JSON; ARGV[4], ARGV[5], ARGV[6]: the record's JSON and when it expires (ms, and
# seconds), when KEYS[8] is not ''.
# Reply: {1, version}, or {0, the name taken}.
_COMMIT = """
local c = cjson.decode(ARGV[1])
local taken = {}
for _, name in ipairs(c.taken) do taken[name] = true end
for _, name in ipairs(c.new) do
  if taken[name] or redis.call('HEXISTS', KEYS[2], name) == 1 or redis.call('HEXISTS', KEYS[3], name) == 1
      or redis.call('HEXISTS', KEYS[4], name) == 1 then
    return {0, name}
  end
end
local hashes = {keys = KEYS[2], groups = KEYS[3], admins = KEYS[4], overlays = KEYS[5]}
for kind, names in pairs(c.delete) do
  for _, name in ipairs(names) do redis.call('HDEL', hashes[kind], name) end
end
for kind, docs in pairs(c.put) do
  for name, doc in pairs(docs) do redis.call('HSET', hashes[kind], name, doc) end
end
local version = redis.call('INCR', KEYS[1])
redis.call('ZADD', KEYS[6], ARGV[2], string.format('%020d', version) .. ARGV[3])
if KEYS[8] ~= '' then
  redis.call('SET', KEYS[8], ARGV[4])
  redis.call('PEXPIREAT', KEYS[8], ARGV[5])
  redis.call('ZADD', KEYS[9], ARGV[6], KEYS[8])
end
redis.call('PUBLISH', KEYS[7], version)
return {1, version}
"""

# KEYS[1]: the records' index (record name → expires). ARGV[1]: now. Forgets the records expired.
_FORGET = """
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
for _, name in ipairs(gone) do redis.call('DEL', name) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
return #gone
"""

# KEYS[1]: the last-used hash; ARGV: name, time, … — the later time wins.
_TOUCH = """
for i = 1, #ARGV, 2 do
  local old = redis.call('HGET', KEYS[1], ARGV[i])
  if not old or tonumber(old) < tonumber(ARGV[i + 1]) then redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
return 1
"""

_SEQ = 20  # digits of the version before an audit member's JSON
_PAGE = 500  # audit entries read per round trip while filtering by actor or target


class RedisKeyStore:
    blocking = False

    def __init__(self, state: StateConfig, client: redis.Redis | None = None) -> None:
        self.state = state
        self.client = client if client is not None else connect(state)
        self._commit = self.client.register_script(_COMMIT)
        self._touch = self.client.register_script(_TOUCH)
        self._forget = self.client.register_script(_FORGET)
        self._version, self._keys, self._groups, self._admins, self._overlays, self._last_used, self._audit = (
            key(state, "keys", part) for part in ("version", "keys", "groups", "admins", "overlays", "last_used",
                                                  "audit"))
        self._records = key(state, "keys", "idempotent")  # the records' index, for `purge`
        self.channel = key(state, "keys", "changed")  # PUBLISHed the new version after each commit

    def _record(self, actor: str, idempotency_key: str) -> str:
        # a digest: actor and key are the caller's text, and ':' in either would make two pairs one name
        return key(self.state, "keys", "idempotent", hashlib.sha256(records.dumps([actor, idempotency_key])
                                                                    .encode()).hexdigest())

    def version(self) -> int:
        return int(self.client.get(self._version) or 0)

    def snapshot(self) -> Snapshot:
        pipe = self.client.pipeline(transaction=True)  # MULTI/EXEC: every read at one version
        pipe.get(self._version)
        for name in (self._keys, self._groups, self._admins, self._overlays, self._last_used):
            pipe.hgetall(name)
        version, keys, groups, admins, overlays, last_used = pipe.execute()
        return Snapshot(
            version=int(version or 0),
            keys={_text(n): records.key_from(json.loads(d)) for n, d in keys.items()},
            groups={_text(n): records.group_from(json.loads(d)) for n, d in groups.items()},
            admins={_text(n): records.admin_from(json.loads(d)) for n, d in admins.items()},
            overlays={_text(n): Overlay(_text(n), bool(json.loads(d)["disabled"])) for n, d in overlays.items()},
            last_used={_text(n): float(at) for n, at in last_used.items()})

    def commit(self, change: Change, audit: AuditEntry, idempotent: Idempotent | None = None) -> int:
        doc = {"taken": list(change.taken), "new": [*change.new_keys, *change.new_groups, *change.new_admins],
               "delete": {"keys": list(change.delete_keys), "groups": list(change.delete_groups),
                          "admins": list(change.delete_admins)},
               "put": {"keys": {k.name: records.dumps(records.key_doc(k)) for k in change.put_keys},
                       "groups": {g.name: records.dumps(records.group_doc(g)) for g in change.put_groups},
                       "admins": {a.name: records.dumps(records.admin_doc(a)) for a in change.put_admins},
                       "overlays": {o.name: records.dumps({"disabled": o.disabled}) for o in change.put_overlays}}}
        keys = [self._version, self._keys, self._groups, self._admins, self._overlays, self._audit, self.channel,
                self._record(idempotent.actor, idempotent.key) if idempotent is not None else "", self._records]
        args: list[Any] = [_encode(doc), repr(float(audit.at)), records.dumps(records.audit_doc(audit))]
        if idempotent is not None:
            args += [records.dumps(records.idempotent_doc(idempotent)), int(idempotent.expires * 1000),
                     repr(float(idempotent.expires))]
        done, value = self._commit(keys=keys, args=args)
        if int(done) == 0:
            raise NameTaken(_text(value))
        return int(value)

    def idempotent(self, actor: str, key: str, now: float) -> Idempotent | None:
        found = self.client.get(self._record(actor, key))
        if found is None:
            return None
        record = records.idempotent_from(json.loads(found))
        return record if record.expires > now else None

    def touch(self, used: Mapping[str, float]) -> None:
        if used:
            self._touch(keys=[self._last_used], args=[x for name, at in used.items() for x in (name, repr(float(at)))])

    def audit(self, since: float | None = None, until: float | None = None, actor: str | None = None,
              target: str | None = None, limit: int = 1000) -> list[AuditEntry]:
        high = "+inf" if until is None else f"({float(until)!r}"  # until is exclusive, since inclusive
        low = "-inf" if since is None else repr(float(since))
        if actor is None and target is None:
            return [_entry(m) for m in self._range(high, low, 0, limit)]
        found: list[AuditEntry] = []
        seen: set[bytes] = set()  # an entry written while paging shifts the rest down: read again, kept once
        start = 0
        while len(found) < limit:
            page = self._range(high, low, start, _PAGE)
            for member in page:
                entry = _entry(member)
                if member not in seen and (actor is None or entry.actor == actor) \
                        and (target is None or entry.target == target):
                    found.append(entry)
                seen.add(member)
            if len(page) < _PAGE:
                break
            start += _PAGE
        return found[:limit]

    def _range(self, high: str, low: str, start: int, num: int) -> list[bytes]:
        return list(self.client.zrevrangebyscore(self._audit, high, low, start=start, num=num))  # type: ignore[arg-type]

    def purge(self, before: float, now: float) -> int:
        # Redis forgets each idempotency record at its `expires` by itself; this forgets them as of
        # `now`, as the other stores do, whatever Redis's clock says
        self._forget(keys=[self._records], args=[repr(float(now))])
        return int(self.client.zremrangebyscore(self._audit, "-inf", f"({float(before)!r}"))


def _encode(doc: dict[str, Any]) -> str:
    # Lua's cjson turns an empty JSON object and an empty array alike into an empty table, which
    # the script only iterates: either reads as "nothing"
    return json.dumps(doc, separators=(",", ":"))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _entry(member: bytes) -> AuditEntry:
    return records.audit_from(json.loads(member[_SEQ:]))
