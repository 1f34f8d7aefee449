// RUN: trace --help
