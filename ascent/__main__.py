from ascent.cli import main

main()
