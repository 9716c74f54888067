#!/bin/sh
# Mutation testing of one core module with cosmic-ray; docs/testing.md says how to read the result.
#   mutation/run.sh optim       run .mutation/optim.sqlite (or go on with it) for at most 15 minutes
#   mutation/run.sh optim 60    ... for at most 60 minutes; the mutants not reached stay pending
set -eu
config=mutation/$1.toml
session=.mutation/$1.sqlite
mkdir -p .mutation
if [ ! -f "$session" ]; then
    cosmic-ray init --force "$config" "$session.new"
    cr-filter-operators "$session.new" mutation/filters.toml
    if grep -q line-filter "$config"; then cr-filter-lines --config "$config" "$session.new"; fi
    # cr-rate counts a skipped mutant as killed: the skipped ones leave the session.
    python - "$session.new" <<'PY'
import sqlite3, sys
skipped = "job_id IN (SELECT job_id FROM work_results WHERE worker_outcome = 'SKIPPED')"
with sqlite3.connect(sys.argv[1]) as db:
    for table in ("mutation_specs", "work_items", "work_results"):
        db.execute(f"DELETE FROM {table} WHERE {skipped}")
PY
    mv "$session.new" "$session"
fi
cosmic-ray baseline "$config"
timeout --signal=INT "${2:-15}m" cosmic-ray exec "$config" "$session" || true
cr-report --surviving-only --show-diff "$session"
cr-rate --fail-over 10 "$session"
