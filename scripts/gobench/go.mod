// Go twins of corun's benchmarks that Go's own packages lack (*_test.go here), for
// scripts/go-compare. Standard library only: no requirements, nothing to download.
module corunbench

go 1.19
