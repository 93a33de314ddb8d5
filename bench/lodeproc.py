"""Helpers the bench scripts share for driving a `lode` process."""
import re


def exports(stdout):
    """The `export AWS_...=...` lines `lode serve` prints at start, read from its stdout up to
    the last of them (AWS_DEFAULT_REGION), as a dict."""
    found = {}
    for line in stdout:
        m = re.search(rb"export (AWS_\w+)=(\S+)", line)
        if m:
            found[m.group(1).decode()] = m.group(2).decode()
        if b"AWS_DEFAULT_REGION" in line:
            break
    return found
