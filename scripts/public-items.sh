#!/usr/bin/env bash
# Counts the public items of each library crate, as rustdoc sees them (its
# JSON output, which needs a nightly toolchain): types (structs, enums,
# unions, traits, type aliases), functions (free functions and the methods
# of inherent impls; trait methods are counted with their trait), and the
# rest (constants, statics, macros, modules). Used for the counts in
# CHANGELOG.md:
#
#   scripts/public-items.sh            # every library crate
#   scripts/public-items.sh tollgate   # one
set -euo pipefail
cd "$(dirname "$0")/.."
crates=("$@")
if [ ${#crates[@]} -eq 0 ]; then
    crates=(tollgate-core tollgate tollgate-redis tollgate-axum tollgate-tonic tollgate-postgres)
fi
target=${PUBLIC_ITEMS_TARGET:-target/public-items}
for crate in "${crates[@]}"; do
    CARGO_TARGET_DIR=$target cargo +nightly rustdoc -q -p "$crate" --all-features -- \
        -Z unstable-options --output-format json 2>/dev/null
    json="$target/doc/${crate//-/_}.json"
    python3 - "$crate" "$json" <<'PY'
import json, sys
crate, path = sys.argv[1], sys.argv[2]
doc = json.load(open(path))
index = doc["index"]
root = index[str(doc["root"])]
types = functions = other = 0
seen = set()

def kind(item):
    return next(iter(item["inner"])) if isinstance(item["inner"], dict) else item["inner"]

def visit(item_id, via_glob=False):
    global types, functions, other
    key = str(item_id)
    if key in seen or key not in index:
        return
    seen.add(key)
    item = index[key]
    if item.get("crate_id", 0) != 0:
        return
    k = kind(item)
    inner = item["inner"][k] if isinstance(item["inner"], dict) else None
    if k == "module":
        if item_id != doc["root"]:
            other += 1
        for child in inner["items"]:
            child_item = index.get(str(child))
            if child_item and (child_item["visibility"] == "public" or kind(child_item) == "use"):
                visit(child)
        return
    if k == "use":
        if inner.get("id") is not None:
            visit(inner["id"])
        return
    if k in ("struct", "enum", "union", "trait", "type_alias"):
        types += 1
        for impl_id in inner.get("impls", []):
            impl = index.get(str(impl_id))
            if not impl:
                continue
            body = impl["inner"]["impl"]
            if body.get("trait") is None:
                for method in body["items"]:
                    m = index.get(str(method))
                    if m and m["visibility"] == "public":
                        if kind(m) == "function":
                            functions += 1
                        else:
                            other += 1
        if k == "trait":
            functions += len(inner["items"])
        return
    if k == "function":
        functions += 1
        return
    other += 1

visit(doc["root"])
print(f"{crate:16} types {types:4}   functions {functions:4}   other {other:4}")
PY
done
