//! The PostgreSQL upsert sink against a real server (started by scripts/services.sh):
//! the seed 001 pipeline with its main output upserted into a table ends with exactly the
//! rows of the file upsert sink on the same rides, corrections included.

use weir_e2e::gen::rides;
use weir_e2e::services::{file_revenue_rows, revenue_rows, taxi_revenue_to_postgres, unique_table};
use weir_e2e::{weir, Workdir};

#[test]
fn the_table_ends_with_the_same_rows_as_the_file_upsert_sink() {
    let work = Workdir::new();
    let input = work.write_jsonl("rides.jsonl", &rides(3_000, 17));
    let table = unique_table("revenue");
    let dead = work.path("dead.jsonl").display().to_string();
    let late = work.path("late.jsonl").display().to_string();

    let expected = file_revenue_rows(&work, &input);
    assert!(
        expected.len() > 20,
        "enough windows to mean something: {}",
        expected.len()
    );

    let pipeline = taxi_revenue_to_postgres(&work, &table);
    let run_into_postgres = || {
        let rides = format!("rides={input}");
        let late = format!("late={late}");
        let args = [
            "run",
            &pipeline,
            "-q",
            "--input",
            &rides,
            "--output",
            &late,
            "--dead-letter",
            &dead,
        ];
        weir(&args).assert_success();
    };
    run_into_postgres();
    assert_eq!(revenue_rows(&table), expected);

    // Running again (a replay) converges to the same table.
    run_into_postgres();
    assert_eq!(revenue_rows(&table), expected);
}

#[test]
fn a_value_the_column_rejects_fails_the_run_with_postgres_message() {
    let work = Workdir::new();
    let table = unique_table("revenue_bad");
    let good = std::fs::read_to_string(taxi_revenue_to_postgres(&work, &table)).unwrap();
    let bad = good.replace("type = \"bigint\"", "type = \"date\"");
    let pipeline_path = work.write("bad.toml", &bad);
    let input = work.write_jsonl("rides.jsonl", &rides(50, 3));
    let run = weir(&[
        "run",
        &pipeline_path,
        "-q",
        "--input",
        &format!("rides={input}"),
        "--dead-letter",
        &work.path("d.jsonl").display().to_string(),
        "--output",
        &format!("late={}", work.path("l.jsonl").display()),
    ]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("postgres table \"{table}\": upsert failed")),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("invalid input syntax for type date"),
        "{}",
        run.stderr
    );
}
