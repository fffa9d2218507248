#!/usr/bin/env bash
# The HTML reports, opened in a real browser: Snakemake's report of a run (the results browser: one category per
# paper, its verdicts and rendered report first) and one paper's own page (report.html: verdict table, forest
# plot, the report rendered). Debian's chromium renders each headless and saves a screenshot, so that a
# reader sees what a browser shows, JavaScript included (Snakemake's report is a single-page app).
#
#   scripts/report_screenshot.sh [run] [paper] [folder]     # defaults: default welfare docs
#
# Needs chromium (`apt-get install chromium`; the script installs it when run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=${1:-default}
PAPER=${2:-welfare}
DOCS=${3:-docs}
if ! command -v chromium >/dev/null; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-dejavu-core
    else
        echo "report_screenshot.sh: chromium is missing (apt-get install chromium)" >&2; exit 2
    fi
fi
mkdir -p "$DOCS"
REPORT=results/$RUN/report.html
.venv/bin/snakemake --config run="$RUN" --report "$REPORT" ${REPORT_TARGETS:-}
shoot() {  # url, png: headless, a fixed window, time for the page's scripts to run
    chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,1000 \
        --virtual-time-budget=10000 --screenshot="$2" "$1" 2>/dev/null
    test -s "$2" || { echo "report_screenshot.sh: no screenshot of $1" >&2; exit 1; }
    echo "$2"
}
shoot "file://$PWD/$REPORT" "$DOCS/report_browser.png"
shoot "file://$PWD/results/$RUN/$PAPER/report.html" "$DOCS/report_page_$PAPER.png"
