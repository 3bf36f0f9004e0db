// Package grouplag reads how far every consumer group of a Kafka cluster
// lags behind the partitions it reads, for the console's health page.
//
// Read lists the groups (courier's consumers, its replay group
// "courier-replay", and any other client's alike), describes them (state,
// members) and reads, per group, its committed offsets in one request; the
// high-water marks are read once per topic-partition, whatever the number
// of groups reading it. A group's partitions are those it committed an
// offset on and those assigned to its members; the lag of a partition is
// its high-water mark minus the committed offset (the whole high-water
// mark when nothing is committed there).
//
// The figures are a snapshot: offsets and high-water marks are read one
// after the other, while the groups go on, so a busy partition's lag is
// what it was within the time the read took.
package grouplag
