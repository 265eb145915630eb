#!/usr/bin/env bash
# Lists public types (`pub struct|enum|trait|type NAME`) whose name is declared in more
# than one crate under crates/*/src, one line per clash: `NAME crate/path:line ...`.
# Exits 1 when there is a clash, so a tidy check or CI can run it as is.
set -euo pipefail
cd "$(dirname "$0")/.."
clashes=$(
    grep -rnE '^[[:space:]]*pub (struct|enum|trait|type) [A-Za-z0-9_]+' --include='*.rs' crates/*/src \
        | sed -E 's/^(crates\/([^/]+)\/[^:]*):([0-9]+):[[:space:]]*pub (struct|enum|trait|type) ([A-Za-z0-9_]+).*/\5 \2 \1:\3/' \
        | sort -k1,1 -k2,2 \
        | awk '{
            if ($1 != name) { if (ncrates > 1) print line; name = $1; crate = $2; ncrates = 1; line = $1 " " $3 }
            else { if ($2 != crate) { ncrates++; crate = $2 } line = line " " $3 }
        } END { if (ncrates > 1) print line }'
)
if [[ -n "$clashes" ]]; then
    echo "public type names declared in more than one crate:"
    echo "$clashes"
    exit 1
fi
echo "no public type name is declared in two crates"
