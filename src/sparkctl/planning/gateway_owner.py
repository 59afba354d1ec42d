"""The gateway's check of who listens on its upstream port (issue 38: a squatter never gets a key).

The engine binds 127.0.0.1:<internal port> only once its model has loaded, minutes after its
container starts. Until then any local user could bind that port first, and every keyed request
the gateway forwarded would hand them the key. So the gateway starts with its one server in
maintenance (refusing with 503), and this Lua task (HAProxy 2.6 has Lua 5.3) reads the kernel's
socket table four times a second: the server is enabled only while every listener on the port
(IPv4 and IPv6, any address) belongs to the uid the engine runs as, and put back in maintenance
the moment another uid holds it. /proc/net/tcp names each socket's owner to every user; the
gateway runs in the host's network namespace, so it sees the node's sockets.

A listener of the engine's own uid passes: that uid is the node user's or root, who can read the
key anyway (docs/security.md).
"""

from __future__ import annotations

OWNER_PATH = "/run/sparkctl-gateway/owner.lua"  # inside the container (a read-only tmpfs file)

_LUA = r"""-- sparkctl's gateway: serve only while the engine's uid owns its port (planning/gateway_owner.py)
local PORT, UID = "@PORT@", "@UID@"
local function owners(path, out)
  local f = io.open(path, "r")
  if f == nil then return end
  f:read("*l")
  for line in f:lines() do
    local fields = {}
    for w in line:gmatch("%S+") do fields[#fields + 1] = w end
    if fields[4] == "0A" and fields[2]:match(":(%x+)$") == PORT then out[#out + 1] = fields[8] end
  end
  f:close()
end
core.register_task(function()
  local servers = {}  -- the one upstream, in every backend (a backend per named key)
  for _, be in pairs(core.backends) do
    if be.servers["engine"] ~= nil then servers[#servers + 1] = be.servers["engine"] end
  end
  local open, said = false, nil
  while true do
    local uids = {}
    owners("/proc/net/tcp", uids)
    owners("/proc/net/tcp6", uids)
    local ours, other = false, nil
    for _, u in ipairs(uids) do
      if u == UID then ours = true else other = u end
    end
    local want = ours and other == nil
    if want ~= open then
      for _, sv in ipairs(servers) do
        if want then sv:set_ready() else sv:set_maint() end
      end
      open = want
    end
    if other ~= nil and said ~= other then
      core.Alert("port @DEC@ is held by uid " .. other .. ", not the engine's uid " .. UID .. ": no request passes")
    end
    said = other
    core.msleep(250)
  end
end)
"""


def owner_lua(port: int, uid: int) -> str:
    """The task for an engine of `uid` on `port` (hex as /proc/net/tcp writes it)."""
    return _LUA.replace("@PORT@", f"{port:04X}").replace("@UID@", str(uid)).replace("@DEC@", str(port))
