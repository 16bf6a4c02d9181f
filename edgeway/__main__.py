from edgeway.cli import main

main()
