"""Drive labs by hand: python -m tests.testbed up|down|status|reap (run as root from the repo root)."""

from __future__ import annotations

import argparse
import json
import sys
import time

from tests.testbed.lab import Lab, LabError, list_labs, owner_alive, reap_orphans


def _print_info(info: dict) -> None:
    print(f"lab {info['name']} (id {info['id']})")
    print(f"  ssh key      {info['ssh_key']}")
    print(f"  known_hosts  {info['known_hosts']}")
    print(f"  ssh_config   {info['ssh_config']}   (ssh -F {info['ssh_config']} spark1)")
    for n in info["nodes"]:
        print(
            f"  {n['name']}: mgmt {n['mgmt_ip']}  fabric {n['fabric_ip']} ({n['fabric_netdev']}, mtu {n['mtu']})"
            f"  netns {n['netns']}"
        )
        print(f"          DOCKER_HOST={n['docker_host']}  /srv/sparknode -> {n['node_root']}")


def _select(args: argparse.Namespace) -> list[Lab]:
    labs = list_labs()
    if args.all:
        return [Lab._from_state(s) for s in labs]
    if args.name is not None or args.id is not None:
        return [Lab.attach(name=args.name, lab_id=args.id)]
    if len(labs) == 1:
        return [Lab._from_state(labs[0])]
    names = ", ".join(s["name"] for s in labs) or "none"
    raise LabError(f"say which lab (--name, --id or --all); labs: {names}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.testbed", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="bring up a lab that stays until `down`")
    up.add_argument("--nodes", type=int, default=2)
    up.add_argument("--name")
    up.add_argument("--mtu", type=int, default=9000, help="fabric MTU of every node")
    up.add_argument("--disk-mb", type=int, default=2048, help="size of each node's /srv/sparknode")
    up.add_argument("--no-image", action="store_true", help="skip loading the stand-in engine image")
    up.add_argument(
        "--pad-mb", type=int, default=0, help="add a random layer of this size to the engine image"
    )
    up.add_argument("--json", action="store_true")
    down = sub.add_parser("down", help="tear a lab down (also one left by a killed process)")
    for sp in (down,):
        sp.add_argument("--name")
        sp.add_argument("--id", type=int)
        sp.add_argument("--all", action="store_true")
    st = sub.add_parser("status", help="list labs")
    st.add_argument("--json", action="store_true")
    sub.add_parser("reap", help="tear down labs whose owning process died")
    args = p.parse_args(argv)
    try:
        if args.cmd == "up":
            t0 = time.monotonic()
            lab = Lab(args.name, nodes=args.nodes, mtu=args.mtu, disk_mb=args.disk_mb, persistent=True).up()
            if not args.no_image:
                try:
                    lab.install_engine_image(pad_mb=args.pad_mb)
                except BaseException:
                    lab.down()
                    raise
            if args.json:
                print(json.dumps(lab.info(), indent=1))
            else:
                _print_info(lab.info())
                print(
                    f"up in {time.monotonic() - t0:.1f}s; tear down with: python -m tests.testbed down --name {lab.name}"
                )
        elif args.cmd == "down":
            for lab in _select(args):
                lab.down()
                print(f"lab {lab.name} (id {lab.id}) removed")
        elif args.cmd == "status":
            labs = list_labs()
            if args.json:
                print(
                    json.dumps(
                        [Lab._from_state(s).info() | {"owner_alive": owner_alive(s)} for s in labs], indent=1
                    )
                )
            elif not labs:
                print("no labs")
            for s in [] if args.json else labs:
                _print_info(Lab._from_state(s).info())
                owner = "persistent" if s["owner_pid"] is None else f"owner pid {s['owner_pid']}"
                print(f"  ({owner}{'' if owner_alive(s) else ', owner dead'})")
        elif args.cmd == "reap":
            print("reaped: " + (", ".join(reap_orphans()) or "nothing"))
    except LabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
