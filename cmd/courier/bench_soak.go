package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newBenchSoakCmd is `courier bench soak`.
func newBenchSoakCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "soak",
		Short: "(being written)",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return errors.New("not yet") },
	}
}
