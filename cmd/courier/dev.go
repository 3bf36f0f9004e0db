package main

import "github.com/spf13/cobra"

// newDevCmd is being written in this session.
func newDevCmd() *cobra.Command { return &cobra.Command{Use: "dev", Hidden: true} }
