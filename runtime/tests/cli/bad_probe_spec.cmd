// RUN: run unknown_import.wat --probe target_fn -- /bin/true
// RUN: run unknown_import.wat --probe =h -- /bin/true
