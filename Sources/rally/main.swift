import RallyCLI

await RallyCommand.main()
