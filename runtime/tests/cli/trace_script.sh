#!/bin/sh
# A script given to `wprobe trace` where a program is expected (trace_script.cmd).
echo not traced
