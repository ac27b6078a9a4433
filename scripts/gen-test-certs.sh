#!/usr/bin/env bash
# Make a throwaway CA and certificates signed by it, for trying out TLS
# (MONARCH_TLS_CERT / MONARCH_TLS_KEY / MONARCH_TLS_CA, `monarch host
# --tls-*`) and for the tests and benches. Not for production: keys are
# unencrypted and the CA key sits next to them.
#
#   scripts/gen-test-certs.sh DIR NAME...
#
# writes DIR/ca.pem (+ ca.key) and DIR/NAME.pem + DIR/NAME.key for each
# NAME (ECDSA P-256, valid 30 days). Needs the openssl command.
set -euo pipefail
dir=${1:?usage: gen-test-certs.sh DIR NAME...}
shift
mkdir -p "$dir"
umask 077
if [[ ! -f $dir/ca.pem ]]; then
    openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "$dir/ca.key" -out "$dir/ca.pem" -days 30 -subj "/CN=monarch test CA" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        2>/dev/null
fi
ext=$(mktemp)
trap 'rm -f "$ext" "$dir"/*.csr' EXIT
for name in "$@"; do
    printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=DNS:%s.monarch.test\n' "$name" >"$ext"
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "$dir/$name.key" -out "$dir/$name.csr" -subj "/CN=$name" 2>/dev/null
    openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
        -out "$dir/$name.pem" -days 30 -extfile "$ext" 2>/dev/null
done
