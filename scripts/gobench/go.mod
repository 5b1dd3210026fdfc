module corunbench

go 1.19
