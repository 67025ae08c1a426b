#!/usr/bin/env bash
# Makes the webhook's certificates for overlays/generated-certificate, with openssl: a CA and a
# serving certificate signed by it for hami-scheduler's Service DNS names.
#
#   deploy/gen-webhook-cert.sh [--out DIR] [--days N] [--namespace NS] [--service NAME]
#                              [--ip ADDR]... [--force]
#
# writes DIR/ca.crt, DIR/tls.crt, DIR/tls.key (default DIR: the overlay's certs/ directory;
# --days 365; --namespace hami-system; --service hami-scheduler; --ip adds an IPv4 address to
# the certificate's names, for a webhook called by URL). The CA's key is not kept: a
# new certificate means a new CA, and re-applying the overlay updates both the Secret and the
# webhook's caBundle. Existing files are kept unless --force is given. The private key is
# written with mode 0600.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out="$here/overlays/generated-certificate/certs"
days=365
namespace=hami-system
service=hami-scheduler
force=0
ips=()

die() { echo "gen-webhook-cert.sh: $*" >&2; exit 1; }

while (($#)); do
  case "$1" in
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --days) days=${2:?--days needs a number}; shift 2 ;;
    --namespace) namespace=${2:?--namespace needs a name}; shift 2 ;;
    --service) service=${2:?--service needs a name}; shift 2 ;;
    --force) force=1; shift ;;
    --ip) ips+=("${2:?--ip needs an address}"); shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

[[ "$days" =~ ^[1-9][0-9]*$ ]] || die "--days: '$days' is not a positive whole number"
dns_label='^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'
[[ "$namespace" =~ $dns_label ]] || die "--namespace: '$namespace' is not a DNS label"
[[ "$service" =~ $dns_label ]] || die "--service: '$service' is not a DNS label"
for ip in "${ips[@]}"; do
  [[ "$ip" =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] &&
    ((BASH_REMATCH[1] < 256 && BASH_REMATCH[2] < 256 && BASH_REMATCH[3] < 256 &&
      BASH_REMATCH[4] < 256)) || die "--ip: '$ip' is not an IPv4 address"
done
command -v openssl >/dev/null || die "openssl is not installed (Debian package openssl)"

if ((!force)) && [[ -e "$out/tls.crt" || -e "$out/tls.key" || -e "$out/ca.crt" ]]; then
  echo "gen-webhook-cert.sh: $out already holds certificates; kept (--force replaces them)"
  exit 0
fi
mkdir -p "$out"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
umask 077

fqdn="$service.$namespace.svc"
openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
  -keyout "$work/ca.key" -out "$work/ca.crt" -days "$days" \
  -subj "/CN=hami-webhook-ca" \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" 2>"$work/log" ||
  { cat "$work/log" >&2; die "openssl could not make the CA"; }

openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
  -keyout "$work/tls.key" -out "$work/tls.csr" -subj "/CN=$fqdn" 2>"$work/log" ||
  { cat "$work/log" >&2; die "openssl could not make the serving key"; }

names="DNS:$service,DNS:$service.$namespace,DNS:$fqdn,DNS:$fqdn.cluster.local"
for ip in "${ips[@]}"; do names+=",IP:$ip"; done
cat >"$work/ext" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=$names
EXT
openssl x509 -req -in "$work/tls.csr" -CA "$work/ca.crt" -CAkey "$work/ca.key" \
  -CAcreateserial -out "$work/tls.crt" -days "$days" -extfile "$work/ext" 2>"$work/log" ||
  { cat "$work/log" >&2; die "openssl could not sign the serving certificate"; }

openssl verify -CAfile "$work/ca.crt" "$work/tls.crt" >/dev/null ||
  die "the serving certificate does not verify against its CA"

install -m 0644 "$work/ca.crt" "$out/ca.crt"
install -m 0644 "$work/tls.crt" "$out/tls.crt"
install -m 0600 "$work/tls.key" "$out/tls.key"
echo "gen-webhook-cert.sh: wrote $out/ca.crt, tls.crt, tls.key for DNS:$fqdn (valid $days days)"
