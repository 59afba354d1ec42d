"""The facts floor: what a node is, read with probes (a named argv + a pure parser).

Below preflight, init (discover), up (lifecycle) and ship: net, rdma, gpu, disk, docker and the
HF-cache layout. Nothing here judges (no Findings) and nothing imports a command or a core;
`probe.run_batch` runs many probes on a node in one exec.
"""
