#!/usr/bin/env python3
"""What the only-if-absent lock costs kube-apiserver: creating server-side applies of ConfigMaps
with and without `metadata.resourceVersion: 18446744073709551615` (the host's lock, README
"Security model"), in alternating blocks of 200, counting wall time and the CPU of
kube-apiserver and etcd. Run against a control plane of its own:

    target/debug/kubewasm-control-plane /tmp/kc/kubeconfig &   # built by `cargo build -p kubewasm-testenv`
    python3 benches/apply_lock.py /tmp/kc/kubeconfig

Needs the token-and-CA kubeconfig that kubewasm-control-plane writes, and pgrep.
"""

import http.client
import json
import os
import re
import ssl
import sys
import time

BLOCK, BLOCKS = 200, 10
NO_OBJECT_HAS_THIS_VERSION = "18446744073709551615"


def main(kubeconfig):
    kc = open(kubeconfig).read()
    host, port = re.search(r"server: https://([\d.]+):(\d+)", kc).groups()
    ca = re.search(r"certificate-authority: (\S+)", kc).group(1)
    token = re.search(r"token: (\S+)", kc).group(1)
    conn = http.client.HTTPSConnection(host, int(port), context=ssl.create_default_context(cafile=ca))
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}

    def send(method, path, body, content_type):
        conn.request(method, path, body=json.dumps(body), headers={**headers, "Content-Type": content_type})
        response = conn.getresponse()
        return response.status, response.read()

    pids = [int(os.popen(f"pgrep -x {name} | head -1").read()) for name in ("kube-apiserver", "etcd")]

    def cpu():
        ticks = 0
        for pid in pids:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
        return ticks / os.sysconf("SC_CLK_TCK")

    ns = f"apply-lock-{int(time.time())}"
    send("POST", "/api/v1/namespaces", {"metadata": {"name": ns}}, "application/json")
    totals = {True: [0.0, 0.0], False: [0.0, 0.0]}
    n = 0
    for block in range(BLOCKS):
        for lock in (True, False) if block % 2 == 0 else (False, True):
            cpu0, t0 = cpu(), time.time()
            for _ in range(BLOCK):
                n += 1
                meta = {"name": f"cm-{n}", "namespace": ns, "labels": {"kubewasm.dev/plugin": "x"}}
                if lock:
                    meta["resourceVersion"] = NO_OBJECT_HAS_THIS_VERSION
                body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}
                path = f"/api/v1/namespaces/{ns}/configmaps/cm-{n}?fieldManager=kubewasm/x&force=true"
                status, answer = send("PATCH", path, body, "application/apply-patch+yaml")
                assert status == 201, (status, answer[:200])
            totals[lock][0] += time.time() - t0
            totals[lock][1] += cpu() - cpu0
    count = BLOCK * BLOCKS // 2
    for lock, (wall, used) in totals.items():
        name = "with the lock" if lock else "without it"
        print(f"{name}: {count} creates, {wall / count * 1000:.2f} ms each, apiserver + etcd CPU {used:.2f} s")
    print(f"lock / none: wall {totals[True][0] / totals[False][0]:.3f}x, CPU {totals[True][1] / totals[False][1]:.3f}x")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".kubewasm/kubeconfig")
