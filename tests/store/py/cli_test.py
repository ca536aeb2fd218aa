"""Black-box test of the ddprun-store binary: serve, the inspection commands, exit codes
and error lines. Needs no torch.  Usage: cli_test.py PATH/TO/ddprun-store"""
import signal
import socket
import struct
import sys

from store_proc import StoreProcess, cli, expect, watchdog


def main(binary):
    watchdog(120)
    with StoreProcess(binary) as store:
        addr = f"--addr=127.0.0.1:{store.port}"
        expect(cli(binary, "set", addr, "k", "v")[0] == 0, "set")
        expect(cli(binary, "get", addr, "k") == (0, "v\n", ""), "get")
        expect(cli(binary, "set", addr, "bin", "a\x01b") [0] == 0, "set binary")
        expect(cli(binary, "get", addr, "bin")[1] == "a\\x01b\n", "escaped value")
        expect(cli(binary, "get", addr, "--raw", "bin")[1] == "a\x01b", "raw value")
        expect(cli(binary, "add", addr, "n", "5") == (0, "5\n", ""), "add")
        expect(cli(binary, "add", addr, "n", "-8")[1] == "-3\n", "add negative")
        expect(cli(binary, "num-keys", addr)[1] == "3\n", "num-keys")
        expect(sorted(cli(binary, "keys", addr)[1].split()) == ["bin", "k", "n"], "keys")
        expect(cli(binary, "wait", addr, "k", "n")[0] == 0, "wait on existing keys")

        # Keys with bytes a shell cannot type, set by a (legacy, raw) client: `keys` shows
        # them escaped and every KEY argument takes that form back.
        with socket.create_connection(("127.0.0.1", store.port)) as raw:
            for key in (b"nul\x00key", b"back\\slash", b"\xffhi"):
                raw.sendall(b"\x00" + struct.pack("<Q", len(key)) + key +
                            struct.pack("<Q", 1) + b"x")
            raw.sendall(b"\x06")  # GETNUMKEYS: a round trip after the SETs
            expect(len(raw.recv(8)) == 8, "raw SETs answered")
        shown = cli(binary, "keys", addr)[1].split()
        for printed in ("nul\\x00key", "back\\\\slash", "\\xffhi"):
            expect(printed in shown, f"keys shows {printed}: {shown}")
            expect(cli(binary, "get", addr, printed) == (0, "x\n", ""), f"get {printed}")
        expect(cli(binary, "delete", addr, "nul\\x00key")[0] == 0, "delete escaped")
        rc, out, err = cli(binary, "get", addr, "bad\\q")
        expect(rc == 2 and "backslash" in err, f"bad escape: {err}")

        rc, out, err = cli(binary, "get", addr, "missing")
        expect(rc == 1 and "missing" in err and "does not exist" in err, f"get missing: {err}")
        rc, out, err = cli(binary, "wait", addr, "never", "--timeout", "0.3")
        expect(rc == 1 and "never" in err and "timed out" in err, f"wait timeout: {err}")
        expect(cli(binary, "delete", addr, "k")[0] == 0, "delete")
        expect(cli(binary, "delete", addr, "k")[0] == 1, "delete missing")
        rc, out, err = cli(binary, "add", addr, "bin", "1")
        expect(rc == 1 and "decimal" in err, f"add on a non-number: {err}")

        # Bad arguments: one clear line plus a usage hint, exit 2.
        for args in (["get", addr], ["frobnicate"], ["add", addr, "n", "x"],
                     ["keys", "--addr", "nohostport"], ["keys", "--addr", "h:99999"], []):
            rc, out, err = cli(binary, *args)
            expect(rc == 2 and "error" in err and "--help" in err, f"{args}: {rc} {err!r}")
        # Numbers: one line naming the argument and the range; never a 309-digit DBL_MAX,
        # never a value silently saturated or read as octal.
        for args, names in (
                (["add", addr, "n", "99999999999999999999"],
                 ("N: '99999999999999999999' is not a whole number in "
                  "[-9223372036854775808, 9223372036854775807]",)),
                (["add", addr, "n", "1.5"], ("N: '1.5' is not a whole number",)),
                (["keys", addr, "--connect-timeout", "-1"],
                 ("--connect-timeout: '-1' is not a number of seconds in [0, 1000000000]",)),
                (["keys", addr, "--connect-timeout", "1e300"], ("--connect-timeout: '1e300'",)),
                (["keys", addr, "--connect-timeout", "nan"], ("--connect-timeout: 'nan'",)),
                (["wait", addr, "k", "--timeout", "0"],
                 ("--timeout: '0' is not a number of seconds in (0, 1000000000]",)),
                (["serve", "--max-connections", "0"],
                 ("--max-connections: '0' is not a whole number in [1, ",)),
                (["serve", "--max-key-bytes", "-1"], ("--max-key-bytes: '-1' is not a whole",)),
                (["serve", "--port", "99999"],
                 ("--port: '99999' is not a whole number in [0, 65535]",))):
            rc, out, err = cli(binary, *args)
            first = err.splitlines()[0] if err else ""
            expect(rc == 2 and first.startswith("ddprun-store: error: ") and
                   all(n in first for n in names) and len(first) < 200,
                   f"{args}: {rc} {err!r}")
        expect(cli(binary, "add", addr, "n", "010") == (0, "7\n", ""), "010 is ten")
        expect(cli(binary, "add", addr, "n", "-9223372036854775808") ==
               (0, "-9223372036854775801\n", ""), "INT64_MIN is a whole number")
        expect(cli(binary, "--help")[0] == 0, "--help")
        expect("serve" in cli(binary, "--help")[1], "--help lists serve")

        # Another server on the same port: exit 1 naming host:port.
        rc, out, err = cli(binary, "serve", "--host", "127.0.0.1", "--port", str(store.port))
        expect(rc == 1 and f"127.0.0.1:{store.port}" in err, f"bind failure: {err}")

        rc = store.stop(signal.SIGINT)
        expect(rc == 0, f"ddprun-store exited {rc} on SIGINT")
        # Nothing listens there any more: exit 1 naming the address and the reason.
        rc, out, err = cli(binary, "keys", addr, "--connect-timeout", "0.3")
        expect(rc == 1 and f"127.0.0.1:{store.port}" in err and "refused" in err,
               f"connection failure: {err}")
    with StoreProcess(binary, "--max-key-bytes", "8", "--max-value-bytes", "16") as store:
        addr = f"--addr=127.0.0.1:{store.port}"
        expect(cli(binary, "set", addr, "k" * 8, "v" * 16)[0] == 0, "set within the limits")
        for key, value in (("k" * 9, "v"), ("k", "v" * 17)):
            rc, out, err = cli(binary, "set", addr, key, value)
            expect(rc == 1 and "closed" in err, f"set over the limits: {rc} {err!r}")
        expect(cli(binary, "num-keys", addr)[1] == "1\n", "nothing stored over the limits")
        expect(store.stop(signal.SIGTERM) == 0, "exit status on SIGTERM")
    print("cli_test: ok")


if __name__ == "__main__":
    main(sys.argv[1])
