// RUN: compile --help
