//! Writes wattson's man pages and shell completions: `cargo run -p wattson-docs -- <dir>`
//! (`man1/`, `man5/`, `man8/`, `completions/` under `<dir>`; default `target/docs`).

fn main() -> std::process::ExitCode {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "target/docs".to_string());
    match wattson_docs::write_all(std::path::Path::new(&dir)) {
        Ok(files) => {
            for file in files {
                println!("{}", file.display());
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("wattson-gen-docs: {dir}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
