#!/usr/bin/env bash
# Makes the TLS material of a lathe fleet with openssl: a CA, a server certificate for lathed
# and client certificates for workers and clients (mTLS: lathed --tls-client-ca).
#
#   make-certs.sh DIR ca                      DIR/ca.pem, DIR/ca.key (a new CA; kept if present)
#   make-certs.sh DIR server NAME SAN...      DIR/NAME.pem, DIR/NAME.key for lathed; each SAN is
#                                             IP:ADDRESS or DNS:NAME (what the workers dial)
#   make-certs.sh DIR client NAME             DIR/NAME.pem, DIR/NAME.key for a worker or client
#
# Keys are ECDSA P-256; certificates last DAYS days (default 825). Keys are written 0600.
set -euo pipefail

usage() {
  sed -n '2,10p' "$0" >&2
  exit 2
}
[[ $# -ge 2 ]] || usage
dir=$1
kind=$2
shift 2
days=${DAYS:-825}
mkdir -p "$dir"
umask 077

case "$kind" in
  ca)
    [[ $# -eq 0 ]] || usage
    if [[ -f "$dir/ca.pem" && -f "$dir/ca.key" ]]; then exit 0; fi
    openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days "$days" \
      -subj "/CN=lathe fleet CA" -addext basicConstraints=critical,CA:TRUE \
      -addext keyUsage=critical,keyCertSign,cRLSign \
      -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
    chmod 0644 "$dir/ca.pem"
    ;;
  server | client)
    [[ $# -ge 1 ]] || usage
    name=$1
    shift
    [[ -f "$dir/ca.pem" && -f "$dir/ca.key" ]] || {
      echo "make-certs: no CA in $dir: run '$0 $dir ca' first" >&2
      exit 1
    }
    ext=$(mktemp)
    trap 'rm -f "$ext" "$dir/$name.csr"' EXIT
    if [[ $kind == server ]]; then
      [[ $# -ge 1 ]] || {
        echo "make-certs: a server certificate needs at least one SAN (IP:... or DNS:...)" >&2
        exit 2
      }
      sans=$(
        IFS=,
        echo "$*"
      )
      printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n' >"$ext"
      printf 'extendedKeyUsage=serverAuth\nsubjectAltName=%s\n' "$sans" >>"$ext"
    else
      [[ $# -eq 0 ]] || usage
      printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n' >"$ext"
      printf 'extendedKeyUsage=clientAuth\n' >>"$ext"
    fi
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$name" \
      -keyout "$dir/$name.key" -out "$dir/$name.csr" 2>/dev/null
    openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
      -CAcreateserial -days "$days" -extfile "$ext" -out "$dir/$name.pem" 2>/dev/null
    chmod 0644 "$dir/$name.pem"
    ;;
  *) usage ;;
esac
