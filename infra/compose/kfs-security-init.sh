#!/bin/sh
# The daemon's SASL_SSL listener in docker compose: a CA and server certificate
# (made once, kept in the kfs-certs volume) and the first SASL user, whose
# password comes from KFS_SASL_PASSWORD on standard input, never an argument.
set -eu
python3 /opt/kfs/infra/compose/make_certs.py /etc/kfs/certs kfs localhost 127.0.0.1
if kfs users list | cut -f1 | grep -qx "$KFS_SASL_USER"; then
    echo "SASL user $KFS_SASL_USER exists"
else
    printf '%s\n' "$KFS_SASL_PASSWORD" | kfs users add "$KFS_SASL_USER"
fi
