//! selector's unit tests of private helpers: the lexer and the DNS-subdomain
//! check. The public behaviour is tested in `tests/selector_parse.rs`.

use super::*;

#[test]
fn lexer_splits_operators_glued_to_words() {
    assert_eq!(
        lex("a!=b,!c,d==e"),
        vec![
            Token::Word("a".into()),
            Token::Punct("!="),
            Token::Word("b".into()),
            Token::Punct(","),
            Token::Punct("!"),
            Token::Word("c".into()),
            Token::Punct(","),
            Token::Word("d".into()),
            Token::Punct("=="),
            Token::Word("e".into()),
            Token::End,
        ]
    );
}

#[test]
fn dns_subdomain_rejects_uppercase_and_edge_dashes() {
    assert!(is_dns_subdomain("example.com"));
    assert!(is_dns_subdomain("a-b.c1"));
    assert!(!is_dns_subdomain("Example.com"));
    assert!(!is_dns_subdomain("-a.com"));
    assert!(!is_dns_subdomain("a..com"));
    assert!(!is_dns_subdomain("a_b.com"));
}
