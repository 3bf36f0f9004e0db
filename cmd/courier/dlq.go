package main

import "github.com/spf13/cobra"

// newDLQCmd is being written in this session.
func newDLQCmd() *cobra.Command { return &cobra.Command{Use: "dlq", Hidden: true} }
