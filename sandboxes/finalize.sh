#!/bin/sh
# Shared last step of both image builds (Dockerfile and offline bootstrap), run INSIDE the
# image's root: create the keep-alive user, the job directory layout the pool expects, and
# strip everything a sandboxed Python program never needs (docs, man pages, locales, apt
# caches), which is most of a minbase system's size.
set -eu
# 65533 runs the keep-alive process, 65534 (nobody) runs the runner and the submitted code:
# distinct uids, so `kill -9 -1` run as the code's uid can never stop the container.
grep -q '^sandbox-keepalive:' /etc/group || echo 'sandbox-keepalive:x:65533:' >> /etc/group
grep -q '^sandbox-keepalive:' /etc/passwd || \
    echo 'sandbox-keepalive:x:65533:65533:sandbox keep-alive:/nonexistent:/usr/sbin/nologin' >> /etc/passwd
# /job becomes an anonymous volume per container (files arrive there by put_archive, which the
# engine refuses on a read-only root but allows on a volume); /job/work belongs to the code's
# uid so the runner can delete the tests file after reading it.
mkdir -p /job/work
chown 0:0 /job && chmod 0755 /job
chown 65534:65534 /job/work && chmod 0700 /job/work
rm -rf /usr/share/doc/* /usr/share/man/* /usr/share/info/* /usr/share/locale/* \
    /usr/share/lintian /usr/share/common-licenses /var/cache/apt/* /var/lib/apt/lists/* \
    /var/cache/debconf/*-old /var/lib/dpkg/*-old /var/log/* /tmp/* 2>/dev/null || true
# a sandbox never installs packages or runs maintainer scripts: drop perl, apt's libraries,
# glibc's iconv modules (Python has its own codecs) and pydoc's data (~20 MB in all)
rm -rf /usr/bin/perl* /usr/lib/x86_64-linux-gnu/perl* /usr/share/perl* \
    /usr/lib/x86_64-linux-gnu/gconv /usr/lib/python3*/pydoc_data \
    /usr/lib/python3*/lib2to3/tests /usr/lib/python3*/idlelib 2>/dev/null || true
find /usr/lib/python3* -name '__pycache__' -prune -o -name 'test' -type d -path '*/python3.*/test' -print \
    | xargs rm -rf 2>/dev/null || true
