// RUN: trace -- ./trace_script.sh
