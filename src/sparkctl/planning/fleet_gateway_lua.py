"""The fleet gateway's Lua (HAProxy 2.6, Lua 5.3; planning/fleet_gateway.py loads it): one state
per HAProxy thread, so the config keeps `nbthread 1` and every count below is the whole gateway's.

- `fleet_wait`, an http-req action on every routed POST: counts the service's request and its
  time; while its server is not UP, a request for an on-demand service sleeps in 250 ms steps
  (counted as waiting: the supervisor on the controller reads that and starts the service) until
  it is UP or `wait_s` has passed; a service not on demand never waits. Still not UP: it sets
  txn.unloaded and the config answers 503 with Retry-After.
- `fleet_models`: GET /v1/models, every route in OpenAI's shape with `loaded` (its server UP).
- `fleet_state`: GET /sparkctl/fleet-state (operators only) for the supervisor.

A waiter is a deadline, not a counter: a client that hangs up mid-wait (HAProxy may end its Lua
without returning) drops out of `waiting` once its deadline passes.
"""

from __future__ import annotations

SERVER = "gateway"  # the one server of each backend svc_<service>: that service's own gateway
POLL_MS = 250

_LUA = r"""-- sparkctl's fleet gateway (planning/fleet_gateway_lua.py)
local ROUTES = {
@ROUTES@
}
local WAIT_S, POLL_MS, SERVER = @WAIT@, @POLL@, "@SERVER@"
local STARTED = os.time()
local state, serial = {}, 0
for _, r in ipairs(ROUTES) do state[r.service] = {requests = 0, last = nil, waiters = {}} end

local function now()
  local t = core.now()
  return t.sec + t.usec / 1000000
end

local function js(s)  -- a JSON string: quote, backslash and control bytes escaped
  return '"' .. (string.gsub(s, '[%c"\\]', function(c) return string.format("\\u%04x", string.byte(c)) end)) .. '"'
end

local function loaded(service)  -- one of its servers (a mode's API) passes its check
  local be = core.backends["svc_" .. service]
  if be == nil then return false end
  for name, sv in pairs(be.servers) do
    local status = sv:get_stats().status
    if string.sub(name, 1, #SERVER) == SERVER and status ~= nil and string.sub(status, 1, 2) == "UP" then
      return true
    end
  end
  return false
end

local function waiting(st, t)
  local n = 0
  for token, deadline in pairs(st.waiters) do
    if deadline > t then n = n + 1 else st.waiters[token] = nil end
  end
  return n
end

core.register_action("fleet_wait", {"http-req"}, function(txn)
  local service = txn:get_var("txn.svc")
  local st = state[service]
  if st == nil then return end
  st.requests = st.requests + 1
  st.last = now()
  if loaded(service) then return end
  local route
  for _, r in ipairs(ROUTES) do if r.service == service then route = r end end
  if route.on_demand then
    serial = serial + 1
    local token, deadline = serial, now() + WAIT_S
    st.waiters[token] = deadline
    while not loaded(service) and now() < deadline do core.msleep(POLL_MS) end
    st.waiters[token] = nil
  end
  if not loaded(service) then txn:set_var("txn.unloaded", 1) end
end, 0)

local function reply(applet, body)
  applet:set_status(200)
  applet:add_header("content-type", "application/json")
  applet:add_header("content-length", tostring(string.len(body)))
  applet:start_response()
  applet:send(body)
end

core.register_service("fleet_models", "http", function(applet)
  local items = {}
  for _, r in ipairs(ROUTES) do
    items[#items + 1] = '{"id":' .. js(r.id) .. ',"object":"model","created":' .. STARTED
      .. ',"owned_by":"sparkctl","service":' .. js(r.service) .. ',"loaded":' .. tostring(loaded(r.service)) .. '}'
  end
  reply(applet, '{"object":"list","data":[' .. table.concat(items, ",") .. ']}')
end)

core.register_service("fleet_state", "http", function(applet)
  local t, items = now(), {}
  for _, r in ipairs(ROUTES) do
    local st = state[r.service]
    local age = st.last and string.format("%.3f", t - st.last) or "null"
    items[#items + 1] = js(r.service) .. ':{"loaded":' .. tostring(loaded(r.service))
      .. ',"waiting":' .. waiting(st, t) .. ',"requests":' .. st.requests
      .. ',"last_request_age_s":' .. age .. ',"on_demand":' .. tostring(r.on_demand) .. '}'
  end
  reply(applet, '{"services":{' .. table.concat(items, ",") .. '}}')
end)
"""


def lua_string(text: str) -> str:
    """`text` as a Lua 5.3 literal: every byte but letters, digits and a few marks as \\ddd."""
    safe = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-:/@+"
    return '"' + "".join(chr(c) if c in safe else f"\\{c:03d}" for c in text.encode()) + '"'


def fleet_lua(routes: list[tuple[str, str, bool]], wait_s: int) -> str:
    """The Lua for `routes` (service, the id /v1/models lists, on demand) and the wait bound."""
    rows = [
        f"  {{service = {lua_string(s)}, id = {lua_string(i)}, on_demand = {str(d).lower()}}},"
        for s, i, d in routes
    ]
    return (
        _LUA.replace("@ROUTES@", "\n".join(rows))
        .replace("@WAIT@", str(wait_s))
        .replace("@POLL@", str(POLL_MS))
        .replace("@SERVER@", SERVER)
    )
