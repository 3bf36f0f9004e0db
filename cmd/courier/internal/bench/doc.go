// Package bench holds the harnesses behind `courier bench` and the
// benchmarks of the producer and consumer packages. Each measures courier
// beside a baseline in one run, against the same services, and returns
// figures: benchmarks are programs that print numbers, never tests that
// assert a wall-clock time.
package bench
